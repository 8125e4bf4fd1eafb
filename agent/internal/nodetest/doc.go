// Package nodetest makes the test nodes of the agent's tests: a network
// namespace with an underlay interface, for the tests that program routes
// (they need root; the namespace goes with the test).
package nodetest
