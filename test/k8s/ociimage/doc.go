// Package ociimage writes a single-layer container image as an OCI image
// layout in a tar archive, the format `ctr images import`, `podman load`
// and `docker load` read. It needs no registry, daemon or base image: the
// layer is built from the files and links given, so static binaries make
// a complete image. It does not compress, sign or push anything, and it
// holds one image per archive.
package ociimage
