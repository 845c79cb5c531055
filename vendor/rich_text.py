"""Comment text: CommonMark with tables and strike-through, mentions of people, and no raw HTML. No ORM here.

Raw HTML in the text is escaped by the parser, and what the renderer makes is sanitised again by an
allow-list (nh3): only the tags Markdown produces survive, links keep http, https and mailto targets and
open with rel="noopener noreferrer nofollow", images are dropped (a comment loads nothing from elsewhere).
"""

import html
import re

import nh3
from markdown_it import MarkdownIt

# Django usernames are letters, digits and @.+-_; a mention ends on one of them other than "." (the end of a
# sentence) and never starts inside a word or an e-mail address.
MENTION = re.compile(r"(?<![\w@.+-])@([\w.+-]*[\w+-])")

ALLOWED_TAGS = {
    "p", "br", "hr", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li", "a",
    "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "span",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}}
ALLOWED_CLASSES = {"span": {"mention"}}
URL_SCHEMES = {"http", "https", "mailto"}

_parser = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def _text_tokens(text: str):
    """The plain-text pieces of the parsed text: never code spans, code blocks or link targets."""
    for block in _parser.parse(text):
        for child in block.children or []:
            if child.type == "text":
                yield child


def mention_candidates(text: str) -> list[str]:
    """Every @username written outside code, in order, once each."""
    found: dict[str, None] = {}
    for token in _text_tokens(text):
        for match in MENTION.finditer(token.content):
            found.setdefault(match.group(1), None)
    return list(found)


def _marked(content: str, mentioned: set[str]) -> str:
    """Plain text as HTML, with the mentions of `mentioned` marked; the rest escaped as written."""
    parts = []
    last = 0
    for match in MENTION.finditer(content):
        name = match.group(1)
        parts.append(html.escape(content[last : match.start()]))
        parts.append(
            f'<span class="mention">@{html.escape(name)}</span>' if name in mentioned else html.escape(match[0])
        )
        last = match.end()
    parts.append(html.escape(content[last:]))
    return "".join(parts)


def render(text: str, mentioned: set[str]) -> str:
    """The text as sanitised HTML; @username of a name in `mentioned` is marked as a mention, others are
    left as they were written."""
    tokens = _parser.parse(text)
    for block in tokens:
        for child in block.children or []:
            if child.type == "text" and "@" in child.content:
                child.type = "html_inline"
                child.content = _marked(child.content, mentioned)
    rendered = _parser.renderer.render(tokens, _parser.options, {})
    return nh3.clean(
        rendered,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        allowed_classes=ALLOWED_CLASSES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
