"""The pack's own machinery: the local real-time lab, probes, support matrix, simulator, embedded Postgres and demo. Not part of the installed package."""
