// Command pause holds a pod sandbox's namespaces open: it sleeps until
// SIGTERM or SIGINT and exits 0. Built static, it is the whole of the
// harness's sandbox image, so no registry is needed for one.
package main
