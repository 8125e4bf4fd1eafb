// Command podnet-image assembles podnet's container image offline, the
// same image deploy/Containerfile builds: the static CLI at
// /opt/podnet/bin/podnet, the plugins in /opt/podnet/cni, and the CLI as
// entrypoint. It writes an OCI image layout in a tar archive that `ctr
// images import`, `podman load` and `docker load` read. `make image` runs
// it on the binaries `make build` made.
package main
