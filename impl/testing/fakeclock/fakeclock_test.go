package fakeclock_test

import (
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Time{})
	if !c.Now().Equal(fakeclock.Start) {
		t.Fatalf("zero start reads %v, want %v", c.Now(), fakeclock.Start)
	}
	c.Advance(90 * time.Second)
	if want := fakeclock.Start.Add(90 * time.Second); !c.Now().Equal(want) {
		t.Fatalf("after Advance %v, want %v", c.Now(), want)
	}
	at := time.Unix(1_000_000, 0)
	c.Set(at)
	if !c.Now().Equal(at) {
		t.Fatalf("after Set %v, want %v", c.Now(), at)
	}
}

func TestReadsAnnouncesEachReading(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Unix(5, 0))
	select {
	case <-c.Reads():
		t.Fatal("a reading announced before any Now call")
	default:
	}
	c.Now()
	select {
	case <-c.Reads():
	default:
		t.Fatal("Now was not announced")
	}
	// More readings than the buffer holds never block the reader.
	for range 2000 {
		c.Now()
	}
}
