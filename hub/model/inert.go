package model

import "strings"

// wordJoin breaks what chat and forge renderers turn into a link or a mention on their own,
// without markup: a scheme's "://", "www.", and "@" before a name. A zero-width space between
// the characters leaves the text as people read it and makes it no URL, host or handle.
var wordJoin = strings.NewReplacer("://", ":\u200b//", "www.", "www\u200b.", "WWW.", "WWW\u200b.", "@", "@\u200b")

// Unlinked is repository text that no renderer links or mentions by itself (bare URLs,
// www. hosts, @mentions and e-mail addresses); each channel still escapes its own markup.
func Unlinked(s string) string { return wordJoin.Replace(s) }
