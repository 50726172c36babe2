KILL QUERY {conn}
