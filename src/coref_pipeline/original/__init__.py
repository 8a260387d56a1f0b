"""The original systems' artefacts read without their code: Joshi et al.'s TensorFlow checkpoints and
experiments.conf entries."""
