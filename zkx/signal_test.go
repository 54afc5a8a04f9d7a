package zkx

import "testing"

func TestSignal(t *testing.T) {
	s := NewSignal()
	select {
	case <-s.C():
		t.Fatal("pending before any Notify")
	default:
	}
	for range 5 {
		s.Notify() // never blocks
	}
	<-s.C()
	select {
	case <-s.C():
		t.Fatal("five Notify calls were not coalesced into one")
	default:
	}
	cp := s
	cp.Notify()
	<-s.C() // copies share the channel
}
