package runner

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
)

// DefaultOwner returns a lease owner identity unique to this process:
// host name, process id and a random suffix (a restarted process with a
// recycled pid still differs).
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	if len(host) > 100 {
		host = host[:100]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
