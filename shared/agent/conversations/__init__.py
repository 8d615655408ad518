"""What people do with their conversations over time: rename, rate and delete
(``manage``), their titles (``titles``) and the daily retention sweep (``retention``)."""
