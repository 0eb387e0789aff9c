package model

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"time"
)

// A bundle lineage is the sequence of bundles one trainer publishes into
// one bundle directory, numbered 1, 2, 3... Its epoch names it. A trainer
// whose directory was wiped starts a new lineage at version 1, under a new
// epoch, so predictors can tell "an older bundle of the lineage I follow"
// (a stale answer: refused) from "the first bundle of a new lineage" (the
// trainer's models from now on: taken). Without epochs a predictor that had
// served v57 ignored the new v1, v2... until it restarted.

// maxEpochLen bounds an epoch read from a bundle; NewEpoch's are 33 bytes.
const maxEpochLen = 64

// NewEpoch names a new lineage: the UTC time it began, to the second, and
// 64 random bits, so two trainers started in the same second differ.
func NewEpoch(now time.Time) string {
	var r [8]byte
	rand.Read(r[:]) // never fails (crypto/rand since Go 1.24)
	return fmt.Sprintf("%s-%016x", now.UTC().Format("20060102T150405Z"), binary.BigEndian.Uint64(r[:]))
}

// checkEpoch refuses an epoch that would be unsafe to echo in logs and
// status pages: one longer than maxEpochLen, or with characters beyond
// letters, digits and . _ : -.
func checkEpoch(e string) error {
	if len(e) > maxEpochLen {
		return fmt.Errorf("epoch of %d bytes, at most %d", len(e), maxEpochLen)
	}
	for _, c := range e {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return fmt.Errorf("epoch %q: only letters, digits and . _ : - are allowed", e)
		}
	}
	return nil
}

// Supersedes reports whether next may replace cur in service: always when
// nothing is in service or next is another lineage (a different epoch, or
// one bundle with an epoch and the other without), never when it is the
// same bundle (same checksum), and within one lineage only when its
// version is not older.
func Supersedes(next, cur *Bundle) bool {
	switch {
	case cur == nil:
		return true
	case next.Checksum == cur.Checksum:
		return false
	case next.Epoch != cur.Epoch:
		return true
	}
	return next.Version >= cur.Version
}

// RemoveBundlesExcept removes every bundle in dir but version keep: what a
// predictor does to its local copies when the trainer starts a new lineage,
// whose low versions the prune by version would otherwise delete first,
// and whose restart would otherwise load the old lineage's newest.
func RemoveBundlesExcept(dir string, keep uint64) error {
	vs, err := BundleVersions(dir)
	if err != nil {
		return err
	}
	for _, v := range vs {
		if v == keep {
			continue
		}
		if err := os.Remove(BundlePath(dir, v)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove bundle %d of an old lineage: %w", v, err)
		}
	}
	return nil
}
