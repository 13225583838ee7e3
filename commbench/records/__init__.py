"""What a run leaves: result files (`results`), where rank 0's records go (`outputs`), the
Prometheus file, each file's provenance and the results database (`db/`). No torch; imports the
shared modules at the top of commbench/ only (docs/extending.md, "Where things are")."""
