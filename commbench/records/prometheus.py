"""--prometheus FILE: a run's figures in node_exporter's textfile-collector format, through
prometheus_client (its own gauges and writer: the file is written beside and renamed, so the
collector never reads half of it). Written when the run ends; a later run replaces it.

Op runs: bus bandwidth and latency per op, dtype, group and size (the last figure of each);
doctor.py: per host and per pair of hosts their figures, each host's and link's suspicion and
the check's health; replay.py: one pass of the trace (median, seconds); parallel_bench.py: per
strategy its step time (median) and samples per second. Every series carries the run's backend,
dist and --tag as labels.
"""

_BASE = ("backend", "dist", "tag")


class PrometheusFile:
    def __init__(self, path, meta, tag):
        self.path = path
        self.base = {"backend": str(meta.get("backend") or ""), "dist": str(meta.get("dist") or ""),
                     "tag": tag or ""}
        self.world_size = meta.get("world_size")
        self.sizes, self.hosts, self.links, self.verdict = {}, {}, {}, None
        self.replay, self.strategies = None, {}

    def add(self, record):
        kind = record.get("type", "result")
        if kind == "result" and record.get("window") is None and not record.get("warmup"):
            key = (record.get("op"), record.get("dtype") or "", record.get("groups") or "world",
                   str(record.get("group") if record.get("group") is not None else ""),
                   str(record.get("size_bytes")))
            self.sizes[key] = record
        elif kind == "doctor" and "host" in record:
            self.hosts[record["host"]] = record
        elif kind == "doctor" and len(record.get("hosts") or ()) == 2 and \
                "control_for" not in record and record.get("phase") != "fleet":
            self.links[tuple(record["hosts"])] = record  # a pair's (not --fleet-wide's groups)
        elif kind == "verdict":
            self.verdict = record
        elif kind == "replay_summary":
            self.replay = record
        elif kind == "strategy":
            self.strategies[record["strategy"]] = record

    def registry(self):
        from prometheus_client import CollectorRegistry
        registry = CollectorRegistry()
        self._sizes(registry)
        self._doctor(registry)
        if self.verdict is not None:
            self._verdict(registry)
        if self.replay is not None and (self.replay.get("pass_s") or {}).get("median"):
            self._gauge(registry, "commbench_replay_pass_seconds",
                        "replay.py: one pass of the trace, median")(self.replay["pass_s"]["median"])
        if self.strategies:
            step = self._gauge(registry, "commbench_strategy_step_seconds",
                               "parallel_bench.py: one training step, median", ("strategy",))
            rate = self._gauge(registry, "commbench_strategy_samples_per_second",
                               "parallel_bench.py: samples per second", ("strategy",))
            for name, record in self.strategies.items():
                step(record["step_time_s"]["median"], strategy=name)
                rate(record["samples_per_s"], strategy=name)
        return registry

    def _gauge(self, registry, name, text, labels=()):
        """put(value, **labels): the series of `name` with the run's labels; a figure of None
        (not measured) is left out."""
        from prometheus_client import Gauge
        made = Gauge(name, text, list(_BASE) + list(labels), registry=registry)

        def put(value, **named):
            if value is not None:
                made.labels(**named, **self.base).set(value)
        return put

    def _sizes(self, registry):
        if not self.sizes:
            return
        labels = ("op", "dtype", "groups", "group", "size_bytes")
        busbw = self._gauge(registry, "commbench_busbw_bytes_per_second",
                            "bus bandwidth per op and size", labels)
        latency = self._gauge(registry, "commbench_latency_seconds",
                              "mean duration of one op per size", labels)
        for key, record in self.sizes.items():
            busbw(record.get("busbw_Bps"), **dict(zip(labels, key)))
            latency(record.get("duration_s"), **dict(zip(labels, key)))

    def _doctor(self, registry):
        """doctor.py's figures: each host's ranks together, each pair of hosts."""
        if self.hosts:
            host_bw = self._gauge(registry, "commbench_doctor_host_busbw_bytes_per_second",
                                  "doctor.py: the ranks of one host together", ("host",))
            host_latency = self._gauge(registry, "commbench_doctor_host_latency_seconds",
                                       "doctor.py: the ranks of one host together", ("host",))
            for host, record in self.hosts.items():
                host_bw(record.get("busbw_Bps"), host=host)
                host_latency(record.get("latency_s"), host=host)
        if self.links:
            link_bw = self._gauge(registry, "commbench_doctor_link_bytes_per_second",
                                  "doctor.py: a pair of hosts, per direction",
                                  ("host_a", "host_b", "direction"))
            link_latency = self._gauge(registry, "commbench_doctor_link_latency_seconds",
                                       "doctor.py: a pair of hosts", ("host_a", "host_b"))
            for (a, b), record in self.links.items():
                for direction in ("forward", "backward", "both"):
                    link_bw(record.get(f"{direction}_Bps"), host_a=a, host_b=b,
                            direction=direction)
                link_latency(record.get("latency_s"), host_a=a, host_b=b)

    def _verdict(self, registry):
        """doctor.py's verdict: healthy or not, 1 for each suspect host, link and switch (0 for
        each host and link measured and in line)."""
        verdict = self.verdict
        self._gauge(registry, "commbench_doctor_healthy", "doctor.py: 1 when nothing is suspect")(
            1 if verdict.get("healthy") else 0)
        suspect = self._gauge(registry, "commbench_doctor_suspect_host",
                              "doctor.py: 1 for a suspect or unreachable host", ("host",))
        named = set(verdict.get("suspect_hosts") or []) | set(verdict.get("unreachable") or [])
        for host in sorted(set(self.hosts) | {h for pair in self.links for h in pair} | named):
            suspect(1 if host in named else 0, host=host)
        suspect_link = self._gauge(registry, "commbench_doctor_suspect_link",
                                   "doctor.py: 1 for a suspect link", ("host_a", "host_b"))
        bad = {tuple(pair) for pair in verdict.get("suspect_links") or []}
        for a, b in sorted(set(self.links) | bad):
            suspect_link(1 if (a, b) in bad else 0, host_a=a, host_b=b)
        switches = verdict.get("suspect_switches") or []
        if switches:
            switch = self._gauge(registry, "commbench_doctor_suspect_switch",
                                 "doctor.py: 1 for a suspect switch (its uplink)", ("switch",))
            for name in switches:
                switch(1, switch=name)

    def write(self):
        from prometheus_client import write_to_textfile
        write_to_textfile(self.path, self.registry())
