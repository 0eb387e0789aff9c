package api

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/gin-gonic/gin"
)

// Issue 11 row 10: a full disk during ingest answered 500, which says the
// server is broken; it is 507 with Retry-After, as docs/RELIABILITY.md says.
func TestWriteStoreError(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		code  int
		retry bool
	}{
		{"ENOSPC wrapped", fmt.Errorf("add 3 samples: %w", &fs.PathError{Op: "write", Path: "samples.db", Err: syscall.ENOSPC}), 507, true},
		{"EDQUOT", fmt.Errorf("commit: %w", syscall.EDQUOT), 507, true},
		{"EFBIG", fmt.Errorf("commit: %w", syscall.EFBIG), 507, true},
		{"bbolt's formatted errno", fmt.Errorf("mmap allocate error: %s", syscall.ENOSPC.Error()), 507, true},
		{"anything else", errors.New("database not open"), 500, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(w)
			writeStoreError(c, "Failed to add training data in bulk", tc.err)
			if w.Code != tc.code || (w.Header().Get("Retry-After") != "") != tc.retry || !strings.Contains(w.Body.String(), tc.err.Error()) {
				t.Errorf("%d %v %s; want %d, Retry-After %v, the cause", w.Code, w.Header(), w.Body, tc.code, tc.retry)
			}
		})
	}
}
