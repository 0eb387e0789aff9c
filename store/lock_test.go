package store

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A file so short that bbolt faults reading it is refused as corrupt, and
// the refusal releases the file: opening it again in the same process says
// corrupt again, not locked, and after MoveAside a new store opens at the
// same path. (The lock used to outlive the refusal, held by bbolt's leftover
// mapping of the file.)
func TestRefusedOpenReleasesLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "samples.db")
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		return meta.Put(keyFormat, binary.BigEndian.AppendUint64(nil, formatVersion))
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)/3], 0o600); err != nil {
		t.Fatal(err)
	}
	opts := Options{Timeout: 200 * time.Millisecond}
	for i := range 2 {
		if _, err := Open(path, opts); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("open %d of a truncated file: %v, want ErrCorrupt", i+1, err)
		}
	}
	if _, err := MoveAside(path); err != nil {
		t.Fatal(err)
	}
	db, err := Open(path, opts)
	if err != nil {
		t.Fatalf("new store after moving the bad one aside: %v", err)
	}
	db.Close()
}
