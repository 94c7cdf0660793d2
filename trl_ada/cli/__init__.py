"""The command-line tools: `trl-ada-train` (`train`), `trl-ada-eval` (`evaluate`), `trl-ada-demo` (`demo`) and
`trl-ada-compare` (`compare`, with its paired statistics in `paired` and plots in `plotting`)."""
