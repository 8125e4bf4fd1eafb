// Package kinderr is the one shape of a domain package's errors: an
// *Error carrying the domain's Kind, which the CNI boundary maps to an
// error code in one place. ipam, dataplane and portmap each define their
// kinds and alias Error to this type instantiated with them, so that none
// of them needs to know CNI and all three are matched the same way.
package kinderr
