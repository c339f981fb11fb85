"""A stand-in for torchvision's model zoo (see ../../README.md): ``models.tiny``."""
