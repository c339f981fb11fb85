"""One small image classifier with torchvision's calling convention: ``tiny()``."""

import torch


def tiny() -> torch.nn.Module:
    """224x224 RGB images -> 1,000 classes, as torchvision's models."""
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 8, stride=8), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(),
                               torch.nn.Linear(64, 1000))
