// Package hostimage turns programs installed on this machine into the
// files of a container image (see ociimage): each program with the shared
// libraries it loads and its dynamic loader, at the paths they have here,
// so that the program runs in the image as it runs on the machine. It is
// how the harness makes the test images whose tools (dig, curl, getent)
// come from the distribution's packages rather than from Go modules.
//
// It reads what the machine's dynamic loader resolves (ldd) and copies
// files; it installs nothing and does not follow a program's dlopen calls
// or data files, which the caller adds when a program needs them.
package hostimage
