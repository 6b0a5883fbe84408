"""Isolated-digit recognition on FSDD with auditory-model vs filterbank features."""
