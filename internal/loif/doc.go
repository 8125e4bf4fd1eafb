// Package loif brings a namespace's loopback interface up or down and
// lists its addresses with an ioctl and one raw netlink dump: what the
// loopback plugin and the plugin manager's in-process loopback need, and
// no more. It links nothing beyond golang.org/x/sys/unix, because the
// loopback plugin pays for every package it links on each exec.
//
// Everything acts on the calling thread's network namespace.
package loif
