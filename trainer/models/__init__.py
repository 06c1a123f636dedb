"""The models: the ResNet family with the temporal shift (TSM), sub-batch BatchNorm, weights in
other layouts (ImageNet starts, official TSM, mmaction2) and --init-from transfers. Imports dist.compat.
"""
