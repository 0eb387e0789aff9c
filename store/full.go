package store

import (
	"errors"
	"strings"
	"syscall"
)

// IsFull reports whether err is the storage refusing to grow: a full disk
// (ENOSPC), a quota (EDQUOT) or a file size limit (EFBIG). Nothing about
// what was being stored is wrong, and storing it later can succeed. bbolt
// reports some of these with the errno formatted into its message rather
// than wrapped, so the messages are matched too.
func IsFull(err error) bool {
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
