package store

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

func TestIsFull(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		full bool
	}{
		{"ENOSPC wrapped", fmt.Errorf("add 3 samples: %w", &fs.PathError{Op: "write", Path: "samples.db", Err: syscall.ENOSPC}), true},
		{"EDQUOT", fmt.Errorf("commit: %w", syscall.EDQUOT), true},
		{"EFBIG", fmt.Errorf("commit: %w", syscall.EFBIG), true},
		{"bbolt's formatted errno", fmt.Errorf("mmap allocate error: %s", syscall.ENOSPC.Error()), true},
		{"another errno", fmt.Errorf("commit: %w", syscall.EIO), false},
		{"anything else", errors.New("database not open"), false},
	} {
		if got := IsFull(tc.err); got != tc.full {
			t.Errorf("%s: IsFull = %v, want %v", tc.name, got, tc.full)
		}
	}
}
