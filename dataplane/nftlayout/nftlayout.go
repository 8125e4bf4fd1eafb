package nftlayout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// markerPrefix starts the name of every marker set.
const markerPrefix = "layout-v"

// markerID names the marker set within a batch. Set here, it keeps the
// library from drawing one from its unsynchronised global counter; it
// is far above the small IDs the tables' own sets use.
const markerID = 0x7f000001

// MarkerName is the name of the set that says a table is of layout v.
func MarkerName(v uint32) string { return markerPrefix + strconv.FormatUint(uint64(v), 10) }

// Marker is the marker set of layout v in t.
func Marker(t *nftables.Table, v uint32) *nftables.Set {
	return &nftables.Set{Table: t, ID: markerID, Name: MarkerName(v), KeyType: nftables.TypeInetService,
		Comment: "podnet: the layout version of this table"}
}

// Declare queues the creation of t's marker of layout v (without
// NLM_F_EXCL: a no-op where it exists) and, when found, the version
// Check found, is an older one, the removal of its marker: a table
// carries one marker, so that an older writer's lookup of its own
// marker fails once a newer one adopted the table. The writer sends it
// in the batch that declares the table.
func Declare(c *nftables.Conn, t *nftables.Table, v, found uint32) error {
	if err := c.AddSet(Marker(t, v), nil); err != nil {
		return fmt.Errorf("nftables: declare the layout marker %s of table %s: %w", MarkerName(v), Name(t), err)
	}
	if found != 0 && found < v {
		old := Marker(t, found)
		old.ID = 0
		c.DelSet(old)
	}
	return nil
}

// Version reads the layout version of the marker sets among sets: the
// highest one, 0 when there is none.
func Version(sets []*nftables.Set) uint32 {
	var v uint32
	for _, s := range sets {
		rest, ok := strings.CutPrefix(s.Name, markerPrefix)
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(rest, 10, 32)
		if err == nil && uint32(n) > v {
			v = uint32(n)
		}
	}
	return v
}

// Check returns a *NewerError when t holds a marker newer than known;
// otherwise the version t is of: known, an older one, or 0 (no marker,
// or no table), for Declare. Its common case, a table of this version,
// is one lookup; the others list the table's sets.
func Check(c *nftables.Conn, t *nftables.Table, known uint32) (uint32, error) {
	_, err := c.GetSetByName(t, MarkerName(known))
	if err == nil {
		return known, nil
	}
	if !notThere(err) {
		return 0, fmt.Errorf("nftables: look up the layout marker of table %s: %w", Name(t), err)
	}
	sets, err := c.GetSets(t)
	if notThere(err) {
		return 0, nil
	}
	if err != nil {
		// A set this library cannot decode is also what a newer layout
		// may hold: refusing is the safe answer.
		return 0, fmt.Errorf("nftables: list the sets of table %s for its layout version: %w", Name(t), err)
	}
	v := Version(sets)
	if v > known {
		return v, &NewerError{Table: Name(t), Found: v, Known: known}
	}
	return v, nil
}

// notThere reports whether a lookup or listing failed because the table
// or set is not there. The library's listings format the netlink error
// instead of wrapping it, so the errno is matched by its text as well.
func notThere(err error) bool {
	return err != nil && (errors.Is(err, unix.ENOENT) || strings.HasSuffix(err.Error(), unix.ENOENT.Error()))
}

// Name is the table as nft names it: family and name.
func Name(t *nftables.Table) string { return familyName(t.Family) + " " + t.Name }

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyARP:
		return "arp"
	case nftables.TableFamilyNetdev:
		return "netdev"
	}
	return "family" + strconv.Itoa(int(f))
}

// NewerError is a table written by a newer podnet than this one: this
// one leaves it as it is.
type NewerError struct {
	Table        string // family and name, "inet podnet-policy"
	Found, Known uint32
}

func (e *NewerError) Error() string {
	return fmt.Sprintf("nftables table %s has layout v%d (marker set %s), newer than the v%d this podnet knows: "+
		"a newer podnet wrote it, so it is left as it is; run that version again, or delete the table by hand for this one to rebuild it",
		e.Table, e.Found, MarkerName(e.Found), e.Known)
}

// IsNewer reports whether err is, or wraps, a *NewerError.
func IsNewer(err error) bool {
	var n *NewerError
	return errors.As(err, &n)
}
