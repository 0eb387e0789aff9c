package api

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/headroomhq/headroom/store"
)

// storageFullRetry is the Retry-After of a 507: space comes back when an
// operator frees it or the store evicts, not in a second.
const storageFullRetry = "30"

// writeStoreError answers a failed store operation: 507 Insufficient
// Storage with Retry-After when the storage is full (store.IsFull: nothing
// was stored; the client may retry once there is room), 500 otherwise.
func writeStoreError(c *gin.Context, what string, err error) {
	if store.IsFull(err) {
		c.Header("Retry-After", storageFullRetry)
		writeDetail(c, http.StatusInsufficientStorage, fmt.Sprintf("%s: storage full, nothing was stored; retry once space is freed: %v", what, err))
		return
	}
	writeDetail(c, http.StatusInternalServerError, fmt.Sprintf("%s: %v", what, err))
}
