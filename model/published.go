package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/headroomhq/headroom/features"
)

// Published is a bundle together with its exact serialised bytes, which is
// what a trainer serves and a predictor verifies. Immutable.
type Published struct {
	Bundle  *Bundle
	Encoded []byte

	dumps [features.NumTargets]struct { // by target: the per-pod ones have trees
		once sync.Once
		data []byte
		err  error
	}
}

// Target is the bundle's model for t; nil when p is nil or t has none.
func (p *Published) Target(t features.Target) *TargetModel {
	if p == nil {
		return nil
	}
	return p.Bundle.Target(t)
}

// TransferStatus is the bundle's transfer model's status; not ready when
// p is nil or the bundle has no transfer model.
func (p *Published) TransferStatus() TransferStatus {
	if p == nil {
		return TransferStatus{}
	}
	return p.Bundle.Transfer.Status()
}

// TreeDump is t's trees in XGBoost's JSON dump format, with the model's
// column names. It is computed once per bundle: the router fetches it every
// minute, and the reference re-dumped 200 trees on every call.
func (p *Published) TreeDump(t features.Target) ([]byte, error) {
	m := p.Target(t)
	if m == nil || m.Trees == nil {
		return nil, fmt.Errorf("%s has no trees", t)
	}
	d := &p.dumps[t]
	d.once.Do(func() { d.data, d.err = json.Marshal(m.Trees.Dump(m.Columns)) })
	return d.data, d.err
}

// ETag is the HTTP entity tag of the bundle: its checksum, quoted.
func (p *Published) ETag() string { return `"` + p.Bundle.Checksum + `"` }

// bundleFilePrefix and bundleFileSuffix frame the version in a bundle's file
// name; the version is zero-padded so names sort in version order.
const (
	bundleFilePrefix = "bundle-"
	bundleFileSuffix = ".json"
)

// BundlePath is where version v lives in dir.
func BundlePath(dir string, v uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%s%020d%s", bundleFilePrefix, v, bundleFileSuffix))
}

// WriteBundle writes encoded bundle bytes as version v in dir, atomically: a
// temporary file is written and synced, then renamed, then the directory is
// synced. A crash at any point leaves either the old set of files or the new
// one, never a partial bundle under a bundle name.
func WriteBundle(dir string, v uint64, encoded []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("write bundle %d: %w", v, err)
	}
	final := BundlePath(dir, v)
	tmp, err := os.CreateTemp(dir, ".bundle-*.tmp")
	if err != nil {
		return "", fmt.Errorf("write bundle %d: %w", v, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(encoded); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write bundle %d: %w", v, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write bundle %d: sync: %w", v, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("write bundle %d: %w", v, err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("write bundle %d: %w", v, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return final, nil
}

// BundleVersions lists the versions present in dir, newest first.
func BundleVersions(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list bundles in %s: %w", dir, err)
	}
	var vs []uint64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, bundleFilePrefix) || !strings.HasSuffix(name, bundleFileSuffix) {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, bundleFilePrefix), bundleFileSuffix), 10, 64)
		if err != nil {
			continue
		}
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] > vs[j] })
	return vs, nil
}

// LoadNewestBundle reads the newest bundle in dir that verifies, skipping
// (and reporting through skipped) any that do not. It returns nil, nil when
// dir holds no bundle.
func LoadNewestBundle(dir string, key []byte, skipped func(path string, err error)) (*Published, error) {
	vs, err := BundleVersions(dir)
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		path := BundlePath(dir, v)
		data, err := os.ReadFile(path)
		if err == nil {
			var b *Bundle
			if b, err = Decode(data, key); err == nil {
				return &Published{Bundle: b, Encoded: data}, nil
			}
		}
		if skipped != nil {
			skipped(path, err)
		}
	}
	return nil, nil
}

// PruneBundles removes all but the newest keep bundles in dir, and the
// temporary files of writes a crash cut short (WriteBundle removes its own
// on every error it sees). Only the directory's one writer may call it, and
// not during a write of its own.
func PruneBundles(dir string, keep int) error {
	vs, err := BundleVersions(dir)
	if err != nil {
		return err
	}
	if stale, err := filepath.Glob(filepath.Join(dir, ".bundle-*.tmp")); err == nil {
		for _, path := range stale {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("prune bundles: %w", err)
			}
		}
	}
	for i, v := range vs {
		if i >= keep {
			if err := os.Remove(BundlePath(dir, v)); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("prune bundle %d: %w", v, err)
			}
		}
	}
	return nil
}
