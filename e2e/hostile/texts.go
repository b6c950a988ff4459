// Package hostile holds the strings tests feed to every channel that shows repository text to
// people (chat notifications, commit statuses, preview comments, the dashboard): each one is
// built to become markup, a link, a mention or a command there.
package hostile

// Texts are repository-written names and messages built to break out of plain text.
var Texts = []string{
	"<img src=x onerror=alert(1)>",
	"[click](https://evil.example/steal)",
	"![pixel](https://evil.example/p.png)",
	"visit https://evil.example/login now",
	"or www.evil.example today",
	"@channel @here @security-team please approve",
	"<!channel> <@U024BE7LH> <https://evil.example|click>",
	"**bold** _italic_ `code` ~~strike~~",
	"```\n</details><script>alert(1)</script>\n```",
	"| col | umn |\n| --- | --- |",
	"\n# Approved by the security team\n",
	"mail admin@evil.example",
	"\\`code\\` &lt;b&gt; &#60;b&#62;",
	"line\r\n```diff\r\n+ injected",
}
