"""The REST API's acceptance endpoints: questions with their chains, answers, runs, targets, promotions."""
