package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/podnet/podnet/ipam"
)

// A stored value is modRev(8) createRev(8) value.
const hdrLen = 16

func decodeKV(key string, v []byte) ipam.KV {
	return ipam.KV{
		Key:         key,
		ModRevision: int64(binary.BigEndian.Uint64(v[0:8])),
		// bbolt's slices die with the transaction.
		Value: bytes.Clone(v[hdrLen:]),
	}
}

// compare holds when key's ModRevision equals modRev; 0 means the key
// must not exist.
type compare struct {
	key    string
	modRev int64
}

// op writes value to key, or deletes key when del is set. Deleting a
// missing key is not an error.
type op struct {
	key   string
	value []byte
	del   bool
}

func encodeValue(mod, create int64, value []byte) []byte {
	b := make([]byte, hdrLen+len(value))
	binary.BigEndian.PutUint64(b[0:8], uint64(mod))
	binary.BigEndian.PutUint64(b[8:16], uint64(create))
	copy(b[hdrLen:], value)
	return b
}

func getInt(b *bolt.Bucket, k []byte) int64 {
	v := b.Get(k)
	if v == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func putInt(b *bolt.Bucket, k []byte, n int64) error {
	return b.Put(k, binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// Log entries: key rev(8) index(4); value type(1) key-length(4) key value.
func logKey(rev int64, i int) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 12), uint64(rev))
	return binary.BigEndian.AppendUint32(k, uint32(i))
}

func encodeLog(t ipam.EventType, key string, value []byte) []byte {
	b := make([]byte, 0, 5+len(key)+len(value))
	b = append(b, byte(t))
	b = binary.BigEndian.AppendUint32(b, uint32(len(key)))
	b = append(b, key...)
	return append(b, value...)
}

func decodeLog(k, v []byte) (rev int64, t ipam.EventType, key string, value []byte) {
	rev = int64(binary.BigEndian.Uint64(k[:8]))
	t = ipam.EventType(v[0])
	n := binary.BigEndian.Uint32(v[1:5])
	return rev, t, string(v[5 : 5+n]), bytes.Clone(v[5+n:])
}

// apply runs one txn inside a bbolt write transaction. Compares are all
// checked before anything is written, so ErrConflict leaves tx untouched
// and other requests of a group commit can still commit.
func (s *Store) apply(tx *bolt.Tx, cmps []compare, ops []op) (int64, error) {
	kv := tx.Bucket(kvBucket)
	meta := tx.Bucket(metaBucket)
	for _, c := range cmps {
		var mod int64
		if v := kv.Get([]byte(c.key)); v != nil {
			mod = int64(binary.BigEndian.Uint64(v[0:8]))
		}
		if mod != c.modRev {
			return 0, fmt.Errorf("%s: at revision %d, not %d: %w", c.key, mod, c.modRev, ipam.ErrConflict)
		}
	}
	cur := getInt(meta, revKey)
	if len(ops) == 0 {
		return cur, nil
	}
	rev := cur + 1
	lg := tx.Bucket(logBucket)
	for i, op := range ops {
		k := []byte(op.key)
		old := kv.Get(k)
		if op.del {
			if old == nil {
				continue
			}
			if err := kv.Delete(k); err != nil {
				return 0, err
			}
			if err := lg.Put(logKey(rev, i), encodeLog(ipam.EventDelete, op.key, nil)); err != nil {
				return 0, err
			}
			continue
		}
		create := rev
		if old != nil {
			create = int64(binary.BigEndian.Uint64(old[8:16]))
		}
		if err := kv.Put(k, encodeValue(rev, create, op.value)); err != nil {
			return 0, fmt.Errorf("put %q: %w", op.key, err)
		}
		if err := lg.Put(logKey(rev, i), encodeLog(ipam.EventPut, op.key, op.value)); err != nil {
			return 0, err
		}
	}
	if err := putInt(meta, revKey, rev); err != nil {
		return 0, err
	}
	return rev, s.trimLog(lg, meta, rev)
}

// trimLog drops log entries older than LogRetain revisions and records the
// newest dropped revision, so watchers asking for it learn it is gone.
func (s *Store) trimLog(lg, meta *bolt.Bucket, rev int64) error {
	cutoff := rev - s.opts.LogRetain
	if cutoff <= getInt(meta, compactKey) {
		return nil
	}
	c := lg.Cursor()
	for k, _ := c.First(); k != nil && int64(binary.BigEndian.Uint64(k[:8])) <= cutoff; k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return putInt(meta, compactKey, cutoff)
}
