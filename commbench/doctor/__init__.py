"""doctor.py: a cluster's hosts and links checked, the slow or broken one named.

  schedule  which pairs of hosts are measured together (round robin; retests)
  measure   the measurements: a host's ranks among themselves, a pair of hosts both ways
  control   how ranks stay in step without the world's collectives (a dead host must not
            stop the check): the rendezvous store
  verdict   robust statistics: each host and link against its peers' median
  render    the per-host table, the pair matrix, the verdict; the records
  run       the check from start to verdict (doctor.py's main)
"""
