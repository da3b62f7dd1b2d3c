package consumer

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestBackoffDoublesToMaxAndResets(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	var got []time.Duration
	for range 6 {
		got = append(got, b.Next())
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("Next: %v, want %v", got, want)
	}
	b.Reset()
	if d := b.Next(); d != 100*time.Millisecond {
		t.Fatalf("Next after Reset: %v, want 100ms", d)
	}
}

// Results group ids one call per token and outcome, yield completions
// first, and forget an id whose lease was lost.
func TestResultsGroupOrderAndForget(t *testing.T) {
	var r Results[int]
	fail := Key[int]{Token: 1, Kind: Fail, Text: "boom"}
	failLater := Key[int]{Token: 1, Kind: Fail, Text: "boom", After: time.Minute, Fixed: true}
	done1, done2 := Key[int]{Token: 1}, Key[int]{Token: 2}
	for _, a := range []struct {
		k  Key[int]
		id int64
	}{{fail, 10}, {done1, 11}, {failLater, 12}, {done2, 20}, {done1, 13}, {fail, 14}} {
		r.Add(a.k, a.id)
	}
	if r.Len() != 4 || r.Only(Complete) || r.Only(Fail) {
		t.Fatalf("Len %d, Only(Complete) %v, Only(Fail) %v; want 4, false, false", r.Len(), r.Only(Complete), r.Only(Fail))
	}
	var empty Results[int]
	if !empty.Only(Complete) {
		t.Fatal("no results: Only(Complete) is false, want true (nothing else waits)")
	}
	var kinds []Kind
	got := map[Key[int]][]int64{}
	for k, ids := range r.All() {
		kinds = append(kinds, k.Kind)
		got[k] = ids
	}
	if !slices.Equal(kinds, []Kind{Complete, Complete, Fail, Fail}) {
		t.Fatalf("order of kinds %v, want completions first", kinds)
	}
	if !slices.Equal(got[done1], []int64{11, 13}) || !slices.Equal(got[fail], []int64{10, 14}) || !slices.Equal(got[failLater], []int64{12}) {
		t.Fatalf("groups %v", got)
	}
	r.Forget(1, 13) // token 1's complete keeps 11
	r.Forget(1, 12) // the fixed-delay fail had only 12: gone
	r.Forget(2, 14) // 14 is token 1's: nothing happens
	got = map[Key[int]][]int64{}
	for k, ids := range r.All() {
		got[k] = ids
	}
	if len(got) != 3 || !slices.Equal(got[done1], []int64{11}) || !slices.Equal(got[fail], []int64{10, 14}) || !slices.Equal(got[done2], []int64{20}) {
		t.Fatalf("after Forget: %v", got)
	}
	r.Done(done1)
	if r.Len() != 2 {
		t.Fatalf("after Done: Len %d, want 2", r.Len())
	}
}

// Send calls the verb of the key's kind with its token, ids, text and delay.
func TestStoreSendCallsTheKindsVerb(t *testing.T) {
	var calls []string
	echo := func(name string) func(context.Context, int, []int64) ([]int64, error) {
		return func(_ context.Context, tok int, ids []int64) ([]int64, error) {
			calls = append(calls, name)
			return ids[:1], nil // one acted on: the others were lost
		}
	}
	var failAfter *time.Duration
	s := Store[int]{
		Complete: echo("complete"),
		Release:  echo("release"),
		DeadLetter: func(_ context.Context, _ int, ids []int64, text string) ([]int64, error) {
			calls = append(calls, "dead_letter "+text)
			return nil, errors.New("down")
		},
		Fail: func(_ context.Context, _ int, ids []int64, text string, after *time.Duration) (int, int, error) {
			calls = append(calls, "fail "+text)
			failAfter = after
			return len(ids), 1, nil
		},
	}
	ids := []int64{1, 2, 3}
	if got := s.Send(context.Background(), Key[int]{Kind: Complete}, ids); got.Done != 1 || got.Err != nil {
		t.Fatalf("complete: %+v", got)
	}
	if got := s.Send(context.Background(), Key[int]{Kind: Release}, ids); got.Done != 1 || got.Err != nil {
		t.Fatalf("release: %+v", got)
	}
	if got := s.Send(context.Background(), Key[int]{Kind: DeadLetter, Text: "x"}, ids); got.Err == nil {
		t.Fatalf("dead_letter: %+v, want its error", got)
	}
	if got := s.Send(context.Background(), Key[int]{Kind: Fail, Text: "y"}, ids); got.Done != 3 || got.Dead != 1 || failAfter != nil {
		t.Fatalf("fail: %+v, after %v; want 3 done, 1 dead, the queue's backoff", got, failAfter)
	}
	if s.Send(context.Background(), Key[int]{Kind: Fail, Text: "y", Fixed: true, After: time.Second}, ids); failAfter == nil || *failAfter != time.Second {
		t.Fatalf("fail with a fixed delay passed %v, want 1s", failAfter)
	}
	want := []string{"complete", "release", "dead_letter x", "fail y", "fail y"}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	for k, name := range []string{"complete", "fail", "dead_letter", "release"} {
		if Kind(k).String() != name {
			t.Errorf("Kind(%d).String() = %q, want %q", k, Kind(k).String(), name)
		}
	}
}

// Renew reports renewed ids true, lost ids false, and leaves out the ids of
// a call that failed.
func TestRenewKeptLostAndFailed(t *testing.T) {
	byToken := map[int][]int64{1: {10, 11}, 2: {20}}
	var failed []int64
	kept := Renew(context.Background(), byToken, func(_ context.Context, tok int, ids []int64) ([]int64, error) {
		if tok == 2 {
			return nil, errors.New("down")
		}
		return []int64{11}, nil
	}, func(_ error, ids []int64) { failed = append(failed, ids...) })
	if len(kept) != 2 || kept[10] || !kept[11] {
		t.Fatalf("kept %v, want 10 lost, 11 renewed", kept)
	}
	if _, ok := kept[20]; ok || !slices.Equal(failed, []int64{20}) {
		t.Fatalf("failed call: kept %v, failed %v", kept, failed)
	}
}
