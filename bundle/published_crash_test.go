package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/tmpfs"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/model/modeltest"
)

// envBundleWriterDir makes TestBundleWriterChild the helper process of
// TestKillDuringPublish: it publishes bundles into that directory until
// killed. With envBundleFileLimit set as well, it instead sets RLIMIT_FSIZE
// to that many bytes and writes one large bundle, which must fail.
const (
	envBundleWriterDir = "HEADROOM_TEST_BUNDLE_WRITER_DIR"
	envBundleFileLimit = "HEADROOM_TEST_BUNDLE_FILE_LIMIT"
)

// largeTestBundle is modeltest.Bundle with copies times its TTFT trees: a
// bundle of any size, built in milliseconds.
func largeTestBundle(t testing.TB, copies int) *model.Bundle {
	b := modeltest.Bundle(t)
	rows := []features.Row{{NumRequestRunning: 2}, {NumRequestRunning: 9, InputTokenLength: 700}}
	trees, err := modeltest.CompleteTrees(rand.New(rand.NewPCG(3, 4)), b.TTFT.Schema(), rows, copies*b.TTFT.Trees.NumTrees(), 3)
	if err != nil {
		t.Fatal(err)
	}
	b.TTFT.Trees = trees
	if err := b.TTFT.Prepare(); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBundleWriterChild is not a test of its own: see TestKillDuringPublish
// and TestWriteBundleOnFullDisk. It publishes as the trainer does
// (Write, then Prune), each version after the newest it finds,
// until it is killed.
func TestBundleWriterChild(t *testing.T) {
	dir := os.Getenv(envBundleWriterDir)
	if dir == "" {
		t.Skip("helper process of TestKillDuringPublish")
	}
	if limit := os.Getenv(envBundleFileLimit); limit != "" {
		writeOverFileLimit(t, dir, limit, largeTestBundle(t, 100))
		return
	}
	b := modeltest.Bundle(t)
	vs, err := Versions(dir)
	if err != nil {
		t.Fatal(err)
	}
	next := uint64(1)
	if len(vs) > 0 {
		next = vs[0] + 1
	}
	// Re-encoding only the version keeps the writer inside Write
	// (whose fsync dominates) most of the time, where the kills are meant
	// to land.
	b.Version = 1 << 62
	payload, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	mark := []byte(`"version":` + strconv.FormatUint(b.Version, 10) + `,`)
	if bytes.Count(payload, mark) != 1 {
		t.Fatal("version not found once in the payload")
	}
	for ; ; next++ {
		p := bytes.Replace(payload, mark, []byte(`"version":`+strconv.FormatUint(next, 10)+`,`), 1)
		sum := sha256.Sum256(p)
		data := fmt.Appendf(nil, `{"format":%q,"version":%d,"sha256":%q,"payload":%s}`,
			Format, next, hex.EncodeToString(sum[:]), p)
		if _, err := Write(dir, next, data); err != nil {
			t.Fatal(err)
		}
		if err := Prune(dir, 3); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKillDuringPublish SIGKILLs a process that publishes large bundles in a
// loop, at random moments, and checks after each kill that every bundle
// file in the directory verifies and that the newest never goes backwards.
// The temporary file of a write a kill cut short is cleared by the next
// publication's prune. (A kill leaves the page cache intact, so it cannot
// tear a write the way a power cut can; TestWriteBundleOnFullDisk, where a
// write stops halfway, is the test a non-atomic Write fails.)
func TestKillDuringPublish(t *testing.T) {
	kills := 12
	if os.Getenv("HEADROOM_LONG_TESTS") == "1" {
		kills = 500
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	var newest uint64
	midWrite, published := 0, 0
	for k := 0; k < kills; k++ {
		cmd := exec.Command(exe, "-test.run=^TestBundleWriterChild$")
		cmd.Env = append(os.Environ(), envBundleWriterDir+"="+dir)
		dieWithParent(cmd)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for this child's first publication, then kill it at a random
		// moment of its next ones.
		deadline := time.Now().Add(20 * time.Second)
		for {
			vs, _ := Versions(dir)
			if len(vs) > 0 && vs[0] > newest {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("writer published nothing within 20 s; output:\n%s", out.String())
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(20_000)) * time.Microsecond)
		cmd.Process.Kill()
		err := cmd.Wait()
		if !strings.Contains(err.Error(), "killed") {
			t.Fatalf("writer ended on its own: %v; output:\n%s", err, out.String())
		}

		vs, err := Versions(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) == 0 || vs[0] < newest {
			t.Fatalf("kill %d: newest bundle %v, was %d before", k, vs, newest)
		}
		// Versions up to newest were verified after earlier kills and
		// are never written again.
		for _, v := range vs {
			if v <= newest {
				break
			}
			data, err := os.ReadFile(Path(dir, v))
			if err == nil {
				_, err = Decode(data, nil)
			}
			if err != nil {
				t.Fatalf("kill %d: bundle %d does not load: %v", k, v, err)
			}
		}
		published += int(vs[0] - newest)
		newest = vs[0]
		entries, _ := os.ReadDir(dir)
		tmp := 0
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".tmp") {
				tmp++
			}
		}
		if tmp > 1 {
			t.Errorf("kill %d: %d temporary files; earlier ones should have been pruned", k, tmp)
		}
		midWrite += tmp
	}
	if pub, err := LoadNewest(dir, nil, nil); err != nil || pub == nil || pub.Bundle.Version != newest {
		t.Fatalf("LoadNewest = %v, %v; want version %d", pub, err, newest)
	}
	t.Logf("%d kills, %d of them mid-write (a temporary file left); %d bundles published, newest v%d loads",
		kills, midWrite, published, newest)
}

// writeOverFileLimit is the helper process of TestWriteBundleOnFullDisk's
// file-size-limit case.
func writeOverFileLimit(t *testing.T, dir, limit string, b *model.Bundle) {
	n, err := strconv.ParseUint(limit, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	b.Version = 2
	data, err := Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(data)) <= n {
		t.Fatalf("bundle of %d bytes fits under the %d-byte limit", len(data), n)
	}
	// Go ignores the SIGXFSZ that comes with EFBIG.
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, 2, data); err == nil {
		t.Fatalf("writing %d bytes under a %d-byte file size limit succeeded", len(data), n)
	} else {
		t.Logf("write refused as expected: %v", err)
	}
}

// TestWriteBundleOnFullDisk writes a small bundle, then a large one that
// does not fit: on a tmpfs with too little space (ENOSPC) and under a file
// size limit (EFBIG, for machines where mounting is not allowed). The write
// must fail, leave no file under the new bundle's name and no temporary
// file, and the previous bundle must still load.
func TestWriteBundleOnFullDisk(t *testing.T) {
	small := modeltest.Bundle(t)
	small.Version = 1
	first, err := Encode(small, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, dir string) {
		t.Helper()
		vs, err := Versions(dir)
		if err != nil || len(vs) != 1 || vs[0] != 1 {
			t.Errorf("bundles after the failed write: %v, %v; want only version 1", vs, err)
		}
		pub, err := LoadNewest(dir, nil, func(path string, err error) { t.Errorf("unreadable %s: %v", path, err) })
		if err != nil || pub == nil || pub.Bundle.Version != 1 {
			t.Errorf("previous bundle: %v, %v", pub, err)
		}
		if tmp, _ := filepath.Glob(filepath.Join(dir, ".bundle-*.tmp")); len(tmp) != 0 {
			t.Errorf("temporary files left: %v", tmp)
		}
	}
	t.Run("tmpfs full (ENOSPC)", func(t *testing.T) {
		dir := tmpfs.Mount(t, 64<<10)
		if _, err := Write(dir, 1, first); err != nil {
			t.Fatal(err)
		}
		b := largeTestBundle(t, 100)
		b.Version = 2
		data, err := Encode(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, 2, data); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("writing %d bytes on a 64 KiB tmpfs: %v, want ENOSPC", len(data), err)
		}
		check(t, dir)
	})
	t.Run("file size limit (EFBIG)", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := Write(dir, 1, first); err != nil {
			t.Fatal(err)
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "-test.run=^TestBundleWriterChild$", "-test.v")
		cmd.Env = append(os.Environ(), envBundleWriterDir+"="+dir, envBundleFileLimit+"="+strconv.Itoa(64<<10))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "write refused as expected") {
			t.Fatalf("helper: %v\n%s", err, out)
		}
		check(t, dir)
	})
}

// A temporary file left by a crash mid-write is removed by the next prune,
// and nothing else is.
func TestPruneRemovesStaleTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	b := modeltest.Bundle(t)
	for v := uint64(1); v <= 2; v++ {
		b.Version = v
		data, err := Encode(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, v, data); err != nil {
			t.Fatal(err)
		}
	}
	stale := filepath.Join(dir, ".bundle-12345.tmp")
	other := filepath.Join(dir, "notes.tmp")
	for _, path := range []string{stale, other} {
		if err := os.WriteFile(path, []byte("half a bund"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := Prune(dir, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temporary bundle file still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file that is not a bundle's was removed: %v", err)
	}
	if vs, _ := Versions(dir); len(vs) != 2 {
		t.Errorf("bundles after prune: %v, want both", vs)
	}
}
