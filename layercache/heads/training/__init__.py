"""How a head's weights are fitted: minibatch AdamW (the trainer), the convex full-batch fit of a linear head, the
rule that picks between them, class weights in the loss, and the check that a head collapsed onto one class."""
