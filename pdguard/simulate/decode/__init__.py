"""The decode half of ``simulate``, with the prefill half's roles: the release's own decode code
(``loader``), the stand-ins it is given (``standins``), the world it runs in (``world``) and the
scenarios (``scenarios``)."""
