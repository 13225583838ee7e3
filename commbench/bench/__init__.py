"""The op scripts' engine: running an op (`harness`), one message size (`onesize`), the sizes,
`--precision`, the timing loop, `--overlap`, `--check`, memory, `--per-trial`, the descriptor an
op fills in (`collective`), who is late (`lateness`) and all_to_allv's traffic. Imports ranks/,
records/ and the shared modules at the top of commbench/ (docs/extending.md, "Where things
are")."""
