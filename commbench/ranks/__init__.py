"""What starts and keeps ranks: the layer and backend, the process group and its teardown
(`comm`), launchers, the peers' start-up exchange, `--groups`' layouts, deadlines and stop
signals, each rank's whereabouts, `/dev/shm`, oneCCL, DeepSpeed's JIT builds, named figures
across ranks (`gathered`) and the ranks' clocks. Imports the shared modules at the top of
commbench/ only (docs/extending.md, "Where things are")."""
