"""The noise model: how much healthy pairs' bandwidth spreads, measured here once.

Two healthy checks of 8 simulated hosts (scripts/sim-hosts.sh, one rank each, network
namespaces on one 2-core Intel Xeon; `doctor.py --plan full`, default flags: 16 MiB messages,
7 rounds of 4 pairs at once; 15.0 and 16.3 s of checking, 5.96 and 5.99 Gbps median pair):
each pair's bandwidth (its slower direction), in log, less the median of its round (a busy
moment slows a whole round: that is the round's offset, apart). 56 pairs. Their robust spread
(1.4826 x MAD) is 0.077 (about 8%); the tail is heavier than a normal one's on both sides
(-0.285, -3.7 of it; +0.566). The rounds' medians spread 0.16 about the checks' (sd).

The verdict takes SIGMA as the least spread it assumes (a fleet whose own pairs spread more
uses its own); the model (model.py) draws pair noise from RESIDUALS (with a little jitter) and
round offsets from ROUND_OFFSETS."""

RESIDUALS = (
    -0.285, -0.163, -0.151, -0.148, -0.134, -0.12, -0.118, -0.112, -0.103, -0.09, -0.078,
    -0.075, -0.065, -0.056, -0.049, -0.047, -0.034, -0.031, -0.023, -0.022, -0.021, -0.016,
    -0.014, -0.01, -0.002, -0.002, -0.002, -0.001, 0.001, 0.002, 0.002, 0.002, 0.01, 0.013,
    0.016, 0.021, 0.022, 0.031, 0.034, 0.042, 0.047, 0.049, 0.055, 0.078, 0.08, 0.082, 0.084,
    0.118, 0.19, 0.268, 0.283, 0.303, 0.388, 0.428, 0.47, 0.566)
ROUND_OFFSETS = (
    -0.048, -0.258, -0.281, 0.118, 0.301, 0.085, 0.001, -0.035, -0.025, -0.133, 0.016, 0.277,
    0.059, 0.055)
SIGMA = 0.077  # 1.4826 x MAD of RESIDUALS
ROUND_S = 2.2  # seconds a round of 4 pairs took here (15.7 s / 7 rounds, start-up included)
PAIR_GBPS = 5.98  # the median healthy pair here
