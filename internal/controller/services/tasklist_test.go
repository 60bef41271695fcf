package services

import (
	"fmt"
	"strings"
	"testing"
)

// TestTaskListNamesTheFirstTasks: an event names at most listedTasks tasks
// and counts the rest.
func TestTaskListNamesTheFirstTasks(t *testing.T) {
	if got := taskList([]string{"a", "b"}); got != "(task a) (task b)" {
		t.Errorf("two tasks: %q", got)
	}
	ids := make([]string, 25)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	got := taskList(ids)
	if !strings.HasPrefix(got, "(task 0) (task 1) ") || !strings.HasSuffix(got, "(task 9) and 15 more") || strings.Contains(got, "(task 10)") {
		t.Errorf("25 tasks: %q", got)
	}
}
