"""Browser pages that show a question's proof: the landing pages, the question list and page, the capability
page with the promotion gate."""
