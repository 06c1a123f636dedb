"""The training run: setup, the step and evaluation functions, the loop, its resumable state,
checkpoints and their background writer, metrics and TensorBoard, chain links and the warning signal.
May import data, models, methods and dist.
"""
