"""Tests of trl_ada.integration: the TRL/vLLM glue, through the real trainer (1 and 2 processes, FSDP2, DeepSpeed,
vLLM)."""
