package bundle

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/headroomhq/headroom/model"
)

// A bundle lineage is the sequence of bundles one trainer publishes into
// one bundle directory, numbered 1, 2, 3... Its epoch names it. A trainer
// whose directory was wiped starts a new lineage at version 1, under a new
// epoch, so predictors can tell "an older bundle of the lineage I follow"
// (a stale answer: refused) from "the first bundle of a new lineage" (the
// trainer's models from now on: taken, once its epoch shows it began after
// the bundle in service was made: CheckSuccessor). Without epochs a
// predictor that had served v57 ignored the new v1, v2... until it
// restarted; with epochs alone it took any other lineage, and one replay
// of an old signed bundle rolled every predictor back (issue 26).

// maxEpochLen bounds an epoch read from a bundle; NewEpoch's are 37 bytes.
const maxEpochLen = 64

// NewEpoch names a new lineage: the UTC time it began, to the
// millisecond, and 64 random bits, so two trainers started in the same
// millisecond differ. The time is what shows a predictor that the lineage
// began after the bundle it serves was made (CheckSuccessor): to the
// second, as before, two lineages begun in one second could each pass for
// the newer.
func NewEpoch(now time.Time) string {
	var r [8]byte
	rand.Read(r[:]) // never fails (crypto/rand since Go 1.24)
	return fmt.Sprintf("%s-%016x", now.UTC().Format(epochTimeLayout), binary.BigEndian.Uint64(r[:]))
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

// Why a bundle may not replace the one in service (CheckSuccessor).
var (
	ErrSameBundle = errors.New("it is the bundle in service")
	ErrStale      = errors.New("it is an older version of the lineage in service")
	// ErrOlderLineage: of another lineage, not shown to have begun since
	// the bundle in service was made. A replayed bundle of an older
	// lineage, genuine and signed, is one: taking it rolled a fleet back.
	ErrOlderLineage = errors.New("it is of another lineage, which began before the bundle in service was made")
	// ErrFromTheFuture: made, or of a lineage begun, later than the
	// deciding clock allows (MaxClockSkew). Followed, it would make every
	// genuinely newer lineage look older until its time came.
	ErrFromTheFuture = errors.New("it claims to have been made, or its lineage begun, in the future")
)

// MaxClockSkew is how far ahead of the clock of the one deciding a
// bundle's creation, or its lineage's start, may be: clocks of a trainer
// and its predictors under NTP agree to well within a second.
const MaxClockSkew = 10 * time.Minute

// EpochStart is the time a lineage began, read from its epoch (NewEpoch's
// form, or that of releases before it, to the second), and the precision
// the epoch keeps; ok is false for an epoch that does not say.
func EpochStart(epoch string) (t time.Time, precision time.Duration, ok bool) {
	stamp, _, found := strings.Cut(epoch, "-")
	if !found {
		return time.Time{}, 0, false
	}
	if t, err := time.Parse(epochTimeLayout, stamp); err == nil {
		return t, time.Millisecond, true
	}
	if t, err := time.Parse(epochSecondLayout, stamp); err == nil {
		return t, time.Second, true
	}
	return time.Time{}, 0, false
}

// epochTimeLayout is how NewEpoch writes a lineage's start;
// epochSecondLayout how releases before it did.
const (
	epochTimeLayout   = "20060102T150405.000Z"
	epochSecondLayout = "20060102T150405Z"
)

// CheckSuccessor returns nil when next may replace cur (nil: nothing in
// service) in service, judged at now (zero: by no clock, as a replay in a
// time of its own does); else why not. Bundles are current,
// not only genuine: a predictor never moves to an older bundle, in its
// lineage or another, unless an operator says so (it takes such a bundle
// without asking this). So
//   - nothing made, or of a lineage begun, beyond now + MaxClockSkew;
//   - within one lineage (the same epoch, or both without one), a version
//     not older than cur's;
//   - another lineage only when it proves it began since cur was made:
//     its epoch's start (or, for a bundle without an epoch, a trainer of
//     a release before epochs, its own creation) not before cur's creation,
//     to the precision the epoch keeps. A trainer whose bundles were wiped
//     starts its lineage then; a replay of a lineage it left, or of a
//     trainer it replaced, began before and is refused. An upgraded
//     trainer's first epoch begins after the bundles it made without one.
func CheckSuccessor(next, cur *model.Bundle, now time.Time) error {
	start, precision, ok := EpochStart(next.Epoch)
	if !ok {
		start, precision = next.CreatedAt, 0
	}
	if limit := now.Add(MaxClockSkew); !now.IsZero() && (next.CreatedAt.After(limit) || start.After(limit)) {
		return ErrFromTheFuture
	}
	switch {
	case cur == nil:
		return nil
	case next.Checksum == cur.Checksum:
		return ErrSameBundle
	case next.Epoch == cur.Epoch:
		if next.Version < cur.Version {
			return ErrStale
		}
		return nil
	case start.Before(cur.CreatedAt.Truncate(max(precision, time.Nanosecond))):
		return ErrOlderLineage
	}
	return nil
}

// RemoveExcept removes every bundle in dir but version keep: what a
// predictor does to its local copies when the trainer starts a new lineage,
// whose low versions the prune by version would otherwise delete first,
// and whose restart would otherwise load the old lineage's newest.
func RemoveExcept(dir string, keep uint64) error {
	vs, err := Versions(dir)
	if err != nil {
		return err
	}
	for _, v := range vs {
		if v == keep {
			continue
		}
		if err := os.Remove(Path(dir, v)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove bundle %d of an old lineage: %w", v, err)
		}
	}
	return nil
}
