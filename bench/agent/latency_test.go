package main

import "testing"

// TestPairedMedian pairs samples by round, whatever their order, and
// leaves out rounds one path lacks.
func TestPairedMedian(t *testing.T) {
	capstan := []Sample{{Index: 0, Total: 510}, {Index: 1, Total: 620}, {Index: 2, Total: 530}, {Index: 5, Total: 999}}
	docker := []Sample{{Index: 2, Total: 500}, {Index: 0, Total: 490}, {Index: 1, Total: 560}}
	// Rounds 0, 1 and 2 differ by 20, 60 and 10+20: the median is 30.
	if got := pairedMedian(capstan, docker); got != 30 {
		t.Fatalf("paired median %v, want 30", got)
	}
	if got := pairedMedian(nil, docker); got != 0 {
		t.Fatalf("no pairs: %v", got)
	}
}
