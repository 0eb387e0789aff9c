package store

import (
	"encoding/binary"
	"hash/fnv"
	"io"
	"os"

	bolt "go.etcd.io/bbolt"
)

// bbolt keeps a list of the file's free pages. By default every commit
// writes it, as one run of contiguous pages; under a steady stream of
// uploads into hundreds of buckets that run outgrew the holes freed pages
// left, and the file grew: 239 MB for 55 MB of data, the trainer's RSS
// 290 MB, after 3.5 minutes at 50,000 samples/s into the default scheme's
// full store. So commits leave it out (Open sets NoFreelistSync), and Close
// writes it back: 54 MB and 127 MB in the same run.
//
// A file without the list, which only a crash leaves, makes bbolt's Open
// rebuild it by walking every page, on a goroutine of bbolt's own, where a
// damaged page kills the process instead of failing Open with ErrCorrupt.
// Open therefore checks such a file read-only first (checkUnsynced), on its
// own goroutine, where a fault or a broken invariant becomes an error.

// noFreelist is bbolt's freelist page id for "not written".
const noFreelist = ^uint64(0)

// Offsets in a bbolt meta page (format version 2, in the host's byte order,
// read here as little-endian: on a big-endian host the magic does not match
// and Open behaves as bbolt alone would): a 16-byte page header,
// then magic, version, page size, flags (4 bytes each), the root bucket (16),
// the freelist page id, the high-water page id, the transaction id and the
// checksum, an FNV-64a of the meta's bytes before it (8 each).
const (
	metaStart      = 16
	metaMagic      = 0xED0CDAED
	metaPageSize   = metaStart + 8
	metaFreelist   = metaStart + 32
	metaTxid       = metaStart + 48
	metaChecksum   = metaStart + 56
	metaEnd        = metaStart + 64
	maxMetaPageLen = 64 << 10
)

// hasUnsyncedFreelist reports whether the file at path is a bbolt file
// whose current meta page says its freelist was not written. It reports
// false when it cannot tell (no file, damaged meta pages): bbolt's Open
// then does not walk the pages, or refuses the file itself.
func hasUnsyncedFreelist(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	first := make([]byte, metaEnd)
	if _, err := io.ReadFull(f, first); err != nil {
		return false
	}
	metas := [][]byte{first}
	if size := binary.LittleEndian.Uint32(first[metaPageSize:]); size > 0 && size <= maxMetaPageLen {
		second := make([]byte, metaEnd)
		if _, err := f.ReadAt(second, int64(size)); err == nil {
			metas = append(metas, second)
		}
	}
	var current []byte
	for _, m := range metas {
		if !validMeta(m) {
			continue
		}
		if current == nil || binary.LittleEndian.Uint64(m[metaTxid:]) > binary.LittleEndian.Uint64(current[metaTxid:]) {
			current = m
		}
	}
	return current != nil && binary.LittleEndian.Uint64(current[metaFreelist:]) == noFreelist
}

func validMeta(m []byte) bool {
	if binary.LittleEndian.Uint32(m[metaStart:]) != metaMagic {
		return false
	}
	h := fnv.New64a()
	h.Write(m[metaStart:metaChecksum])
	return h.Sum64() == binary.LittleEndian.Uint64(m[metaChecksum:])
}

// checkUnsynced reads every record of a file a crash left without its
// freelist, read-only (which does not walk the pages on bbolt's goroutine),
// on the calling goroutine. It must run inside Open's recovery.
func (db *DB) checkUnsynced(opts bolt.Options) error {
	opts.ReadOnly = true
	var err error
	if db.bolt, err = bolt.Open(db.path, 0o600, &opts); err != nil {
		db.bolt = nil
		return db.openError(err)
	}
	_, err = db.readState()
	closeErr := db.bolt.Close()
	db.bolt = nil
	if err != nil {
		return err
	}
	return closeErr
}
