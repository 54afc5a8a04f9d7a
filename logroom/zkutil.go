package logroom

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/roomlog/roomlog/third_party/zk"
)

const (
	channelPrefix = "ch-"
	batchPrefix   = "b-"
	numDigits     = 20
)

func channelName(num uint64) string { return fmt.Sprintf("%s%0*d", channelPrefix, numDigits, num) }
func batchName(first uint64) string { return fmt.Sprintf("%s%0*d", batchPrefix, numDigits, first) }

// parseNum parses "<prefix>%020d"; ok is false for any other name.
func parseNum(name, prefix string) (uint64, bool) {
	if len(name) != len(prefix)+numDigits || !strings.HasPrefix(name, prefix) {
		return 0, false
	}
	n, err := strconv.ParseUint(name[len(prefix):], 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// multiErr returns the index and error of the first failed op of a Multi.
func multiErr(res []zk.MultiResponse, err error) (int, error) {
	for i, r := range res {
		if r.Error != nil {
			return i, r.Error
		}
	}
	return -1, err
}

// parallel runs fn(i) for i in [0,n) with at most width calls at once and
// returns the first error (by index order).
func parallel(n, width int, fn func(i int) error) error {
	if n == 0 {
		return nil
	}
	if width > n {
		width = n
	}
	errs := make([]error, n)
	next := make(chan int)
	done := make(chan struct{})
	for w := 0; w < width; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range next {
				errs[i] = fn(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < width; w++ {
		<-done
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// concurrently runs fns at once and returns when all have (each records
// its own result). For reads whose order does not matter: go-zookeeper
// pipelines them on the one connection, so three reads cost about one
// round trip instead of three.
func concurrently(fns ...func()) {
	var wg sync.WaitGroup
	for _, fn := range fns[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	fns[0]()
	wg.Wait()
}
