"""From settings to a job: the plan (allocation, launch, optimisation) checked against the
machine's policy, the resource request, the accumulation and scaling model of simulate, and the pure
rendering of the batch script from the templates. No side effects: profile and options in, data or text out.
"""
