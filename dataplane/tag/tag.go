// Package tag names the attachment that owns what podnet makes on a
// host, in the forms it is stored in: a host veth's alias, the comments
// of masquerade and host port elements. DEL, CHECK and GC find what
// belongs to an attachment by these tags, without state of their own,
// so the forms must never change.
//
// dataplane and portmap share it. It imports nothing but strings: a
// plugin pays for every package it links on every exec, and portmap's
// plugin needs nothing else of dataplane.
package tag

import "strings"

// Owner identifies an attachment: the network and the container end.
type Owner struct {
	Network     string
	ContainerID string
	IfName      string
}

// String is the three fields separated by spaces, none of which may
// contain one (network names, container IDs and interface names are all
// restricted to other characters). It is the comment of portmap's
// elements, and the end of Alias.
func (o Owner) String() string { return o.Network + " " + o.ContainerID + " " + o.IfName }

// ParseOwner reads what Owner.String wrote. ok is false for a string
// that podnet did not write.
func ParseOwner(s string) (o Owner, ok bool) {
	f := strings.Split(s, " ")
	if len(f) != 3 || f[0] == "" || f[1] == "" || f[2] == "" {
		return Owner{}, false
	}
	return Owner{Network: f[0], ContainerID: f[1], IfName: f[2]}, true
}

const aliasPrefix = "podnet "

// Alias is the IFLA_IFALIAS podnet sets on a host veth: it tells GC and
// an idempotent ADD which network and attachment the link belongs to,
// which the name (a hash) cannot.
func (o Owner) Alias() string { return aliasPrefix + o.String() }

// ParseAlias reads an alias written by Owner.Alias.
func ParseAlias(alias string) (Owner, bool) {
	rest, ok := strings.CutPrefix(alias, aliasPrefix)
	if !ok {
		return Owner{}, false
	}
	return ParseOwner(rest)
}

// Comment is the comment of the attachment's masquerade set elements,
// for GC. The network is the set's, so it is left out.
func (o Owner) Comment() string { return o.ContainerID + " " + o.IfName }

// ParseComment reads a masquerade element's comment written by
// Owner.Comment.
func ParseComment(network, comment string) (Owner, bool) {
	cid, ifName, ok := strings.Cut(comment, " ")
	if !ok || cid == "" || ifName == "" || strings.Contains(ifName, " ") {
		return Owner{}, false
	}
	return Owner{Network: network, ContainerID: cid, IfName: ifName}, true
}
