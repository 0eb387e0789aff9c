package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/headroomhq/headroom/features"
)

// Commits leave bbolt's freelist out of the file; Close writes it; a file
// copied while the store was open (as a crash leaves it) opens with every
// sample.
func TestFreelistWrittenAtClose(t *testing.T) {
	path := tempPath(t)
	db, err := Open(path, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	mustAdd(t, db, testSamples(500, 1, 0))
	crashed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crashPath := tempPath(t)
	if err := os.WriteFile(crashPath, crashed, 0o600); err != nil {
		t.Fatal(err)
	}
	if !hasUnsyncedFreelist(crashPath) {
		t.Error("a commit wrote the freelist")
	}
	want := db.Counts()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if hasUnsyncedFreelist(path) {
		t.Error("Close left the file without its freelist")
	}
	again := openTest(t, crashPath, testOptions())
	for _, tg := range features.PodTargets {
		if again.Counts().Train(tg) != want.Train(tg) || again.Counts().Holdout(tg) != want.Holdout(tg) {
			t.Errorf("%s after a crash: %+v, want %+v", tg, again.Counts(), want)
		}
	}
}

// A file a crash left without its freelist, damaged on any one page, is
// refused with ErrCorrupt or opens with its samples; it never takes the
// process down (bbolt rebuilds such a freelist on a goroutine of its own,
// where a damaged page would).
func TestOpenSurvivesEveryDamagedPageAfterCrash(t *testing.T) {
	src := tempPath(t)
	db := openTest(t, src, testOptions())
	mustAdd(t, db, testSamples(2000, 1, 0))
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	openEachDamagedPage(t, orig, 1600)
}

func TestHasUnsyncedFreelistCannotTell(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, bytes.Repeat([]byte{0xED}, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("bolt"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing"), garbage, short} {
		if hasUnsyncedFreelist(path) {
			t.Errorf("%s: says unsynced", filepath.Base(path))
		}
	}
}
