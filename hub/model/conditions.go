package model

import (
	"fmt"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxConditionMessage is the longest message the API server takes in a condition.
const MaxConditionMessage = 32768

// Truncate cuts s to at most n bytes, on a character boundary.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func SetCondition(conds *[]metav1.Condition, c metav1.Condition) { meta.SetStatusCondition(conds, c) }

// ListSome joins up to n names and says how many more there are.
func ListSome(names []string, n int) string {
	if len(names) <= n {
		return fmt.Sprint(names)
	}
	return fmt.Sprintf("%v and %d more", names[:n], len(names)-n)
}

func ShortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
