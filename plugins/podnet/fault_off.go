//go:build !podnetfault

package main

// faultPoint is a no-op in a normal build; see fault_on.go.
func faultPoint(step, netnsPath string) {}
