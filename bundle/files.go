package bundle

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/headroomhq/headroom/model"
)

// bundleFilePrefix and bundleFileSuffix frame the version in a bundle's file
// name; the version is zero-padded so names sort in version order.
const (
	bundleFilePrefix = "bundle-"
	bundleFileSuffix = ".json"
)

// Path is where version v lives in dir.
func Path(dir string, v uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%s%020d%s", bundleFilePrefix, v, bundleFileSuffix))
}

// Write writes encoded bundle bytes as version v in dir, atomically: a
// temporary file is written and synced, then renamed, then the directory is
// synced. A crash at any point leaves either the old set of files or the new
// one, never a partial bundle under a bundle name.
func Write(dir string, v uint64, encoded []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("write bundle %d: %w", v, err)
	}
	final := Path(dir, v)
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

// Versions lists the versions present in dir, newest first.
func Versions(dir string) ([]uint64, error) {
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

// LoadNewest reads the newest bundle in dir that verifies, skipping
// (and reporting through skipped) any that do not. It returns nil, nil when
// dir holds no bundle.
func LoadNewest(dir string, key []byte, skipped func(path string, err error)) (*Published, error) {
	vs, err := Versions(dir)
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		path := Path(dir, v)
		data, err := os.ReadFile(path)
		if err == nil {
			var b *model.Bundle
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

// Prune removes all but the newest keep bundles in dir, and the
// temporary files of writes a crash cut short (Write removes its own
// on every error it sees). Only the directory's one writer may call it, and
// not during a write of its own.
func Prune(dir string, keep int) error {
	vs, err := Versions(dir)
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
			if err := os.Remove(Path(dir, v)); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("prune bundle %d: %w", v, err)
			}
		}
	}
	return nil
}
