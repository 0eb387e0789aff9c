package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/headroomhq/headroom/store"
)

// TestBadStoreFileAtStart starts the trainer on a store file it must not
// use: damaged, or of another format version. It refuses to start, says
// what is wrong and what to do, and leaves the file exactly as it was; with
// --store-reset it moves the file aside, keeps it, and starts empty. (The
// store's own tests try 17 kinds of damage and every damaged page:
// store/db_test.go.)
func TestBadStoreFileAtStart(t *testing.T) {
	incompatible := func(t *testing.T, path string) {
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			meta, err := tx.CreateBucket([]byte("meta"))
			if err != nil {
				return err
			}
			return meta.Put([]byte("format"), binary.BigEndian.AppendUint64(nil, 99))
		})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	for _, tc := range []struct {
		name  string
		make  func(t *testing.T, path string)
		error string
	}{
		{"not a store", func(t *testing.T, path string) {
			os.WriteFile(path, bytes.Repeat([]byte("not a bbolt file "), 2000), 0o600)
		}, "corrupt store"},
		{"truncated", func(t *testing.T, path string) {
			incompatible(t, path)
			data, _ := os.ReadFile(path)
			os.WriteFile(path, data[:len(data)/3], 0o600)
		}, "corrupt store"},
		{"another format version", incompatible, "incompatible store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			path := filepath.Join(dataDir, "samples.db")
			tc.make(t, path)
			original, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"trainer", "--data-dir", dataDir, "--trainer-listen", freeAddr(t), "--no-xgboost"}
			var stderr bytes.Buffer
			if code := run(context.Background(), args, io.Discard, &stderr); code != 1 {
				t.Fatalf("exit %d on a bad store; stderr:\n%s", code, stderr.String())
			}
			msg := stderr.String()
			if !strings.Contains(msg, tc.error) || !strings.Contains(msg, "--store-reset") || !strings.Contains(msg, path) {
				t.Errorf("message %q does not say what is wrong (%s), where, and what to do", msg, tc.error)
			}
			if now, _ := os.ReadFile(path); !bytes.Equal(now, original) {
				t.Fatal("the refused store file was changed")
			}

			// With --store-reset: moved aside intact, a new store in its place.
			ctx, cancel := context.WithCancel(context.Background())
			addr := freeAddr(t)
			var logs lockedBuffer
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, []string{"trainer", "--data-dir", dataDir, "--trainer-listen", addr, "--no-xgboost", "--store-reset"}, io.Discard, &logs)
			}()
			waitFor(t, "the reset trainer to serve", 10*time.Second, func() bool {
				select {
				case code := <-done:
					t.Fatalf("with --store-reset: exit %d; log:\n%s", code, logs.String())
				default:
				}
				code, _ := getJSON("http://"+addr+"/healthz", nil)
				return code == 200
			})
			l := newLedger()
			mustIngest(t, l, "http://"+addr, 20)
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("exit %d; log:\n%s", code, logs.String())
			}
			moved, _ := filepath.Glob(path + ".corrupt-*")
			if len(moved) != 1 {
				t.Fatalf("moved-aside files %v, want one", moved)
			}
			if kept, _ := os.ReadFile(moved[0]); !bytes.Equal(kept, original) {
				t.Error("the moved-aside file differs from the original")
			}
			if !strings.Contains(logs.String(), "moved aside") {
				t.Errorf("the log does not say the store was moved aside:\n%s", logs.String())
			}
			l.check(t, path, store.Options{}) // the trainer's default capacities
		})
	}
}
