// Package connectivity is `podnet connectivity test`: a namespace of its
// own with server pods on two nodes, short-lived prober pods running
// `podnet diag probe`, and a verdict per check (pod to pod on one node
// and across nodes, no SNAT between pods, ClusterIP, NodePort, hostPort,
// DNS, egress to the nodes, NetworkPolicy applied and removed).
//
// The plan (which checks, from where, to what, expecting what), the
// verdicts and the report are pure (plan.go, verdict.go, report.go); the
// Kubernetes I/O is in run.go, objects.go and cleanup.go. It must not
// assume podnet runs in the cluster: without it, a check whose failure
// says nothing about the cluster's network as the Kubernetes network
// model defines it (NetworkPolicy where nothing enforces it, hostPort
// where the CNI may not map ports) is reported not judged, never passed
// on a guess.
package connectivity
