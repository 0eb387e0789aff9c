package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"

	"github.com/gin-gonic/gin"
)

// storageFullRetry is the Retry-After of a 507: space comes back when an
// operator frees it or the store evicts, not in a second.
const storageFullRetry = "30"

// storageFull reports whether err is the storage refusing to grow: a full
// disk (ENOSPC), a quota (EDQUOT) or a file size limit (EFBIG). Nothing
// about the request is wrong, and retrying it later can succeed. bbolt
// reports some of these with the errno formatted into its message rather
// than wrapped, so the messages are matched too.
func storageFull(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG) {
		return true
	}
	msg := err.Error()
	for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG} {
		if strings.Contains(msg, e.Error()) {
			return true
		}
	}
	return false
}

// writeStoreError answers a failed store operation: 507 Insufficient
// Storage with Retry-After when the storage is full (nothing was stored;
// the client may retry once there is room), 500 otherwise.
func writeStoreError(c *gin.Context, what string, err error) {
	if storageFull(err) {
		c.Header("Retry-After", storageFullRetry)
		writeDetail(c, http.StatusInsufficientStorage, fmt.Sprintf("%s: storage full, nothing was stored; retry once space is freed: %v", what, err))
		return
	}
	writeDetail(c, http.StatusInternalServerError, fmt.Sprintf("%s: %v", what, err))
}
