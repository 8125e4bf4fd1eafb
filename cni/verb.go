package cni

// Verb is a CNI_COMMAND: what a runtime asks a plugin to do.
type Verb string

// The specification's verbs.
const (
	VerbAdd     Verb = "ADD"
	VerbDel     Verb = "DEL"
	VerbCheck   Verb = "CHECK"
	VerbStatus  Verb = "STATUS"
	VerbGC      Verb = "GC"
	VerbVersion Verb = "VERSION"
)

// PerAttachment reports whether the verb acts on one attachment, and so
// carries CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME and CNI_ARGS. The others
// act on the whole network (STATUS, GC) or on none (VERSION).
func (v Verb) PerAttachment() bool {
	return v == VerbAdd || v == VerbDel || v == VerbCheck
}

// Since is the specification version that introduced the verb, or "" for
// those every supported version has. A runtime must not send it, and a
// plugin must refuse it, for a configuration of an older version.
func (v Verb) Since() string {
	switch v {
	case VerbCheck:
		return "0.4.0"
	case VerbStatus, VerbGC:
		return "1.1.0"
	}
	return ""
}
