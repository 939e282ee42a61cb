from layercache.heads.mixers import (
    MIXERS,
    LayerMixer,
    MixOutput,
    make_mixer,
    mixer_from_config,
    mixer_names,
)
